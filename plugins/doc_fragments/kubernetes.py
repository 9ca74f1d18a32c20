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
  client_cert:
    description:
      - Path to a client certificate to authenticate with (with O(client_key)); with O(host) no config file is read.
      - Can also be given in the E(K8S_AUTH_CERT_FILE) environment variable.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the private key of O(client_cert).
      - Can also be given in the E(K8S_AUTH_KEY_FILE) environment variable.
    type: path
    aliases: [key_file]
  proxy:
    description:
      - URL of an HTTP proxy to reach the API server through. Proxy settings of the environment (E(HTTPS_PROXY))
        are not read.
      - Can also be given in the E(K8S_AUTH_PROXY) environment variable.
    type: str
  no_proxy:
    description:
      - Comma-separated hosts, domains, IPs and CIDRs reached without O(proxy).
      - Can also be given in the E(K8S_AUTH_NO_PROXY) environment variable.
    type: str
  impersonate_user:
    description:
      - User name to act as; the credentials need the right to impersonate it.
      - Can also be given in the E(K8S_AUTH_IMPERSONATE_USER) environment variable.
    type: str
  impersonate_groups:
    description:
      - Group to act in, with O(impersonate_user). One group at most (the client sends one C(Impersonate-Group)
        header).
      - Can also be given in the E(K8S_AUTH_IMPERSONATE_GROUPS) environment variable.
    type: list
    elements: str
requirements:
  - kubernetes >= 22.6.0 (the Kubernetes Python client) on the controller; the tests run 37.0.2 there and Debian
    12's 22.6.0 (C(python3-kubernetes)) in the node agent, which builds its client with the same code
notes:
  - These are client options of C(kubernetes.core) (its C(k8s_auth_options)) with the same names, aliases and
    C(K8S_AUTH_*) environment variables. Not supported, with no option here - C(username) and C(password),
    C(proxy_headers), C(persist_config), and a kubeconfig given as a mapping (a file only).
"""
