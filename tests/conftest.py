"""Make the checkout importable as ansible_collections.kilo.mesh for plain pytest runs."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_COLLECTIONS = os.path.join(ROOT, ".collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
# The lab driver (lab/lab.py) is imported by host tests as `lab.lab`.
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
