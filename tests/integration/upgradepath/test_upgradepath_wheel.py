"""The build metadata travels with the package: a built wheel, imported straight from the zip file,
reads the same version and engine API range as the source tree."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from corral_upgradepath import build_info

ROOT = Path(__file__).parents[3]
# The Makefile's rule: uv from PATH, else the bootstrapped copy under .tools.
UV = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import corral_upgradepath
from corral_upgradepath import build_info
info = build_info()
print(json.dumps({"file": corral_upgradepath.__file__, "version": info.version,
                  "cli": [info.engine_api.cli_api_min_version, info.engine_api.cli_api_version]}))
"""


def test_wheel_carries_build_toml(tmp_path: Path) -> None:
    subprocess.run(
        [
            str(UV),
            "build",
            str(ROOT / "libs" / "upgradepath"),
            "--wheel",
            "--out-dir",
            str(tmp_path),
            "--offline",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = tmp_path.glob("corral_upgradepath-*.whl")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(wheel)], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["file"].startswith(str(wheel))  # imported from inside the zip, not the source tree
    info = build_info()
    assert seen["version"] == info.version
    assert seen["cli"] == [info.engine_api.cli_api_min_version, info.engine_api.cli_api_version]
