# kilo.mesh: see README.md. Every target runs from the repo root as root.
VENV := .venv
PY := $(VENV)/bin/python
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections
LAB_LOCATIONS ?= 3
LAB_HOSTS ?= 3

.PHONY: setup setup-demo setup-venv specs test unit sanity lint integration molecule vm bench demo demo-down plans lab-up lab-down clean

setup:
	bash scripts/setup.sh all

# What the demo needs (the lab, site.yml), none of the test rig (API server build, VM tools).
setup-demo:
	bash scripts/setup.sh demo

# The controller virtualenv alone (the engine's plans need no host).
setup-venv:
	bash scripts/setup.sh venv

# Doc fragments and role argument specs, written from plugins/module_utils/options.py.
specs: setup-venv
	$(PY) scripts/specs.py

# Every stage runs even when an earlier one fails; the last line counts stages.
test: setup
	bash scripts/test.sh

unit: setup
	$(PY) -m pytest -q tests/unit

sanity: setup
	bash scripts/sanity.sh

lint: setup
	bash scripts/lint.sh

integration: setup
	$(PY) -m pytest -q tests/lab tests/host

# Molecule's own command; env -u shows the scenarios need nothing from this Makefile but PATH.
molecule: setup
	env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH molecule test --all

vm: setup
	KILO_TEST_STAGES="kernel-vm kernel-vm-debian-pyroute2 converge-vm-ipip agent-unit-vm" bash scripts/test.sh

bench: setup
	bash scripts/bench.sh

# The main job on the built-in lab: lab up, site.yml, connectivity matrix, picture.
demo: setup-demo
	bash scripts/demo.sh

demo-down:
	$(PY) lab/lab.py down

# Plans of the example inventory, without any host (the engine alone); kilo-topology.dot here.
plans: setup-venv
	$(VENV)/bin/ansible-playbook -i inventory/example.yml playbooks/plan.yml

lab-up: setup-demo
	$(PY) lab/lab.py up $(LAB_LOCATIONS) $(LAB_HOSTS) 1

lab-down:
	$(PY) lab/lab.py down

clean: demo-down
	rm -rf .build .collections
