"""Kubelet-like fault injection for kwok nodes: restarts, waiting reasons, probes, node conditions, GPU loss, logs."""

from capstan.faults.kubelet import SIGNALS, WAITING_REASONS, Kubelet, Termination

__all__ = ["SIGNALS", "WAITING_REASONS", "Kubelet", "Termination"]
