"""Kubelet-like fault injection for kwok nodes: restarts, waiting reasons, probes, node conditions, GPU loss, logs.

The entry point is :class:`Kubelet` (it writes the pod and node status a kubelet would); :class:`Termination`
describes how a container ended (reason, exit code, signal).
"""

from capstan.faults.kubelet import Kubelet, Termination

__all__ = ["Kubelet", "Termination"]
