"""The engine's plans with one route per destination, as the host sees them after check_plan.

The engine groups routes that share gateway, device and source (``plan.flat_routes``); tests
written against Kilo's route lists compare the flat form.
"""

from ansible_collections.kilo.mesh.plugins.module_utils.plan import flat_routes
from ansible_collections.kilo.mesh.plugins.module_utils.engine.topology import (
    build_plans as _build_plans,
)


def build_plans(*args, **kwargs):
    result = _build_plans(*args, **kwargs)
    result["plans"] = dict(
        (name, dict(plan, routes=flat_routes(plan["routes"])))
        for name, plan in result["plans"].items()
    )
    return result
