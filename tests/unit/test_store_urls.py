"""Store URLs as printed (autotune.store.urls): the password masked in every spelling."""

from __future__ import annotations

import pytest

from autotune.store.urls import masked_url, scrub, secrets_of

URL = "postgresql+psycopg://autotune:s3cr%40t-pw@db.example:5432/studies"


def test_masked_url_hides_the_password():
    assert masked_url(URL) == "postgresql+psycopg://autotune:***@db.example:5432/studies"
    assert masked_url("sqlite:///studies/autotune.db") == "sqlite:///studies/autotune.db"
    assert masked_url("nonsense://u:p@@h").count("p@@") == 0


def test_scrub_removes_the_url_and_every_spelling_of_the_password():
    assert set(secrets_of(URL)) >= {"s3cr@t-pw", "s3cr%40t-pw"}
    text = (
        f"cannot connect to {URL}: password 's3cr@t-pw' rejected "
        "(dsn user=autotune password=s3cr%40t-pw)"
    )
    out = scrub(text, URL)
    assert "s3cr" not in out
    assert "autotune:***@db.example" in out


@pytest.mark.parametrize("ttl", ["nan", "inf", "-inf", "0", "-1", "1e9"])
def test_lease_ttl_is_refused_in_one_line(ttl: str, capsys: pytest.CaptureFixture[str]):
    from autotune.cli import cli
    from autotune.cli._common import report_errors

    code = report_errors(cli, ["study", "run", "nope", "--lease-ttl", ttl])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--lease-ttl" in err


def test_lease_ttl_bounds():
    from autotune.errors import SpecError
    from autotune.store.leases import check_lease_ttl

    check_lease_ttl(0.5)
    check_lease_ttl(60)
    for bad in (0, -1.0, float("nan"), float("inf"), True, 8 * 24 * 3600.0):
        with pytest.raises(SpecError, match="--lease-ttl"):
            check_lease_ttl(bad)  # type: ignore[arg-type]
