"""${env:NAME} and ${file:path:key} in a stage's CREDENTIALS: stored as the reference,
read when the stage is used, errors naming the variable or file (no Spark)."""

from __future__ import annotations

import pytest

from floeline import secrets
from floeline.errors import SqlError
from floeline.secret_references import check, resolve
from floeline.warehouse import stages
from floeline.warehouse.catalog import Warehouse


def test_references_resolve_from_the_environment_and_properties_files(tmp_path, monkeypatch):
    monkeypatch.setenv("LANDING_SECRET", "from-the-env-1234")
    props = tmp_path / "aws.properties"
    props.write_text("# keys\naws.secret = from-a-file-5678\ntoken: tok-9999\n")
    assert resolve("${env:LANDING_SECRET}", "stage S AWS_SECRET_KEY") == "from-the-env-1234"
    assert resolve(f"${{file:{props}:aws.secret}}", "stage S AWS_SECRET_KEY") == "from-a-file-5678"
    assert resolve(f"${{file:{props}:token}}", "stage S AWS_TOKEN") == "tok-9999"
    assert resolve("plain-value", "x") == "plain-value"
    assert secrets.scrub("denied: from-a-file-5678") == "denied: ****"


def test_reference_errors_name_the_variable_or_file_never_a_value(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(SqlError, match=r"stage S AWS_SECRET_KEY refers to the environment variable NOT_SET_ANYWHERE"):
        resolve("${env:NOT_SET_ANYWHERE}", "stage S AWS_SECRET_KEY")
    with pytest.raises(SqlError, match=r"refers to the file /no/such/file.properties, which cannot be read"):
        resolve("${file:/no/such/file.properties:k}", "stage S AWS_SECRET_KEY")
    props = tmp_path / "p.properties"
    props.write_text("other=1\n")
    with pytest.raises(SqlError, match=rf"refers to key k of {props}, which that file does not have"):
        resolve(f"${{file:{props}:k}}", "stage S AWS_SECRET_KEY")
    for bad in ("${vault:x}", "${env:has space}", "${file:nokey}"):
        with pytest.raises(SqlError, match="is not a reference floeline reads"):
            check(bad, "stage S AWS_SECRET_KEY")


def test_a_stage_with_references_stores_them_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("STAGE_KEY", "env-secret-value")
    wh = Warehouse(tmp_path)
    stage = stages.Stage("S", "DB", "SCH", "s3://b/p/", {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "${env:STAGE_KEY}"})
    stages.save_stage(wh, stage)
    assert not (tmp_path / "_secrets").exists()  # a reference is no secret: it stays in the definition
    assert "${env:STAGE_KEY}" in (tmp_path / "DB" / "SCH" / "_stages" / "S.json").read_text()
    loaded = stages.load_stage(wh, "DB", "SCH", "S")
    assert loaded.masked() == {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "${env:STAGE_KEY}"}
    assert loaded.resolved_credentials() == {"AWS_KEY_ID": "AK", "AWS_SECRET_KEY": "env-secret-value"}
