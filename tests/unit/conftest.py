"""tests/unit mirrors plugins/ (tests/unit/plugins/module_utils/engine/ holds the tests of
plugins/module_utils/engine/, and so on; collection-wide tests stay here).

Test modules share their mesh builders and fakes by module name (``from test_mesh_reading import
make_action``, ``from flat_plans import build_plans``), from any depth: so every folder of
tests/unit is on sys.path, and a test module's basename must be unique in the tree."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_seen = {}
for _dir, _subdirs, _files in sorted(os.walk(_HERE)):
    _subdirs[:] = sorted(d for d in _subdirs if not d.startswith((".", "__")))
    for _f in _files:
        if _f.endswith(".py") and _f != "conftest.py":
            assert _f not in _seen, "two test modules named %s: %s and %s" % (_f, _seen[_f], _dir)
            _seen[_f] = _dir
    if _dir not in sys.path:
        sys.path.insert(0, _dir)
