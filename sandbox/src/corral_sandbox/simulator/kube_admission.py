"""The admission the danger-zone settings meet in the sandbox, installed on the emulator in one call:
Longhorn's Setting webhooks (setting_webhooks.py) and kube-apiserver's built-in PriorityClasses and
Priority admission (priority.py). Installed before the seed is applied, so every Setting and pod
the cluster starts with went through them."""

from __future__ import annotations

from corral_sandbox.emulator import Emulator
from corral_sandbox.simulator.priority import PriorityAdmission
from corral_sandbox.simulator.setting_webhooks import SettingWebhooks


def install_kube_admission(emulator: Emulator, namespace: str) -> None:
    SettingWebhooks(emulator, namespace).install(emulator)
    PriorityAdmission(emulator).install(emulator)
