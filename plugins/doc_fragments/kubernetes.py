# -*- coding: utf-8 -*-
# Copyright: kilo.mesh developers
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """How to reach the Kubernetes API (plugins/module_utils/kube/kube_client.py reads these options)."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a Kubernetes config file.
      - Can also be given in the E(K8S_AUTH_KUBECONFIG) environment variable.
      - Without O(kubeconfig) and O(context), and unless O(host) and O(api_key) are both given, the
        in-cluster configuration is used when its service account files exist (running in a pod), else
        the default config file (E(KUBECONFIG), else C(~/.kube/config)).
    type: path
  context:
    description:
      - Name of a context of the config file; its current context when not given.
      - Can also be given in the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
  host:
    description:
      - URL of the API server, for example V(https://203.0.113.10:6443).
      - With O(api_key), no config file is read; otherwise it overrides the server of the config file.
      - Can also be given in the E(K8S_AUTH_HOST) environment variable.
    type: str
  api_key:
    description:
      - Bearer token to authenticate with, for example a service account token.
      - Can also be given in the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate; the config file decides when not given (verify, by default).
      - Can also be given in the E(K8S_AUTH_VERIFY_SSL) environment variable.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to the CA certificate (the whole chain) that signed the API server's certificate.
      - Can also be given in the E(K8S_AUTH_SSL_CA_CERT) environment variable.
    type: path
    aliases: [ssl_ca_cert]
requirements:
  - kubernetes (the Kubernetes Python client) on the controller
"""
