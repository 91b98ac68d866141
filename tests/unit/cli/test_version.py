"""`corral --version` names corral's release and the Longhorn release its gate stands in for."""

from __future__ import annotations

import pytest

from corral_cli.main import main
from corral_upgradepath.build import build_info


def test_version_names_corral_and_the_longhorn_build(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("corral 0.")
    assert out.endswith(f"(Longhorn {build_info().version})")
