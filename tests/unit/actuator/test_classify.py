"""API answers map to outcomes: precondition, not-found, retry or refused (corral_actuator.classify)."""

from __future__ import annotations

import pytest

from corral_actuator.classify import Answer, classify, retry_after_seconds


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (200, Answer.OK),
        (201, Answer.OK),
        (409, Answer.PRECONDITION),
        (422, Answer.PRECONDITION),
        (404, Answer.NOT_FOUND),
        (429, Answer.RETRY),
        (408, Answer.RETRY),
        (500, Answer.RETRY),
        (503, Answer.RETRY),
        (400, Answer.REFUSED),
        (403, Answer.REFUSED),
        (415, Answer.REFUSED),
    ],
)
def test_classify(status: int, answer: Answer) -> None:
    assert classify(status) is answer


def test_retry_after_is_parsed_and_capped() -> None:
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("3600") == 10.0
    assert retry_after_seconds("-1") == 0.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after_seconds(None) is None
