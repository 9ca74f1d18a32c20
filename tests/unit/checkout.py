"""Paths of the checkout, for unit tests at any depth of tests/unit (which mirrors plugins/)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
