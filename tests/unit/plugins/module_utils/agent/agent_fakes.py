"""The one stand-in for the agent's metrics (agent/metrics.py) in unit tests: what the agent's
threads touch of it, recorded (how often health was set, errors counted, the paths shown)."""

import types


class FakeMetrics(object):
    def __init__(self):
        self.sets = 0
        self._health = None
        self.error_count = 0
        self.paths = types.SimpleNamespace(current=None)
        self.errors = types.SimpleNamespace(inc=self._error)

    def _error(self):
        self.error_count += 1

    @property
    def health(self):
        return self._health

    @health.setter
    def health(self, value):
        self.sets += 1
        self._health = value
