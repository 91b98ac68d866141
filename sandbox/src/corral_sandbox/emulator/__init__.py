"""The sandbox's Kubernetes API emulator: enough of kube-apiserver for kubernetes-asyncio to not tell.

`Emulator` is the handle (start/stop, kubeconfig, faults, write log, oracles, admission hooks);
`EmulatorControl` reaches a running emulator in another process over `/_sandbox`.
"""

from corral_sandbox.emulator.app import Emulator
from corral_sandbox.emulator.control import EmulatorControl
from corral_sandbox.emulator.errors import ApiError
from corral_sandbox.emulator.faults import Faults
from corral_sandbox.emulator.writelog import WriteLog, WriteRecord

__all__ = ["ApiError", "Emulator", "EmulatorControl", "Faults", "WriteLog", "WriteRecord"]
