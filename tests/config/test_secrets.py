"""Secrets come from the environment or systemd credentials, and never show in errors or repr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config import ConfigFileError, load_config

PASSWORD = "pa55-w0rd-from-vault"


@pytest.fixture
def credentials(tmp_path: Path) -> Path:
    """What systemd's LoadCredential= leaves in $CREDENTIALS_DIRECTORY: one file per credential."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    (directory / "mqtt-password").write_text(PASSWORD + "\n")
    for name in ("ca.pem", "client.crt", "client.key"):
        (directory / name).write_text(f"-----BEGIN {name}-----\n")
    return directory


def test_environment_variables_fill_strings(base_config: dict[str, Any], write_config: Any, tmp_path: Path) -> None:
    video = tmp_path / "videos" / "${literal}-box-7.mp4"
    video.parent.mkdir()
    video.symlink_to(tmp_path / "etc" / "video.mp4")
    base_config["device_id"] = "${EDGE_ID}"
    base_config["mqtt"] |= {"host": "${BROKER:-broker.local}", "password": "${MQTT_PASSWORD}", "port": "${PORT}"}
    base_config["pipelines"][0]["source"]["path"] = f"{tmp_path}/videos/$${{literal}}-${{EDGE_ID}}.mp4"
    environ = {"EDGE_ID": "box-7", "MQTT_PASSWORD": PASSWORD, "PORT": "8883", "BROKER": ""}
    config = load_config(write_config(base_config), environ=environ)
    assert config.device_id == "box-7"
    assert config.mqtt.host == "broker.local"  # empty counts as unset for a default, as in the shell
    assert config.mqtt.port == 8883
    assert config.mqtt.password is not None and config.mqtt.password.get_secret_value() == PASSWORD
    assert config.pipelines[0].source.path == video  # type: ignore[union-attr]


def test_credentials_fill_values_and_file_fields(
    base_config: dict[str, Any], write_config: Any, credentials: Path
) -> None:
    base_config["mqtt"] |= {
        "username": "box-1",
        "password": "!credential mqtt-password",
        "tls": {
            "ca_file": "!credential ca.pem",
            "cert_file": "!credential client.crt",
            "key_file": "!credential client.key",
        },
    }
    config = load_config(write_config(base_config), environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert config.mqtt.password is not None
    assert config.mqtt.password.get_secret_value() == PASSWORD  # the file's trailing newline is not part of it
    assert config.mqtt.tls is not None
    assert config.mqtt.tls.key_file == credentials / "client.key"
    assert config.mqtt.tls.cert_file == credentials / "client.crt"
    assert config.mqtt.effective_port == 8883


def test_an_empty_credential_counts_as_absent(
    base_config: dict[str, Any], write_config: Any, credentials: Path
) -> None:
    """The unit's `SetCredential=NAME:\\n` fallback: boxes without a client certificate or password."""
    for name in ("mqtt-password", "client.crt", "client.key"):
        (credentials / name).write_text("\n")
    base_config["mqtt"] |= {
        "password": "!credential mqtt-password",
        "tls": {"cert_file": "!credential client.crt", "key_file": "!credential client.key"},
    }
    config = load_config(write_config(base_config), environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert config.mqtt.password is None
    assert config.mqtt.tls is not None and config.mqtt.tls.cert_file is None and config.mqtt.tls.key_file is None


@pytest.mark.parametrize(
    ("value", "environ", "fragment"),
    [
        ("!credential mqtt-password", {}, "$CREDENTIALS_DIRECTORY is not set"),
        ("!credential ../etc/shadow", {"CREDENTIALS_DIRECTORY": "/run/credentials"}, "needs the name of a credential"),
        ("!credential absent", {"CREDENTIALS_DIRECTORY": "CREDS"}, "credential absent not found in"),
    ],
)
def test_unusable_credentials(
    value: str,
    environ: dict[str, str],
    fragment: str,
    base_config: dict[str, Any],
    write_config: Any,
    credentials: Path,
) -> None:
    base_config["mqtt"]["password"] = value
    environ = {key: v.replace("CREDS", str(credentials)) for key, v in environ.items()}
    with pytest.raises(ConfigFileError) as raised:
        load_config(write_config(base_config), environ=environ)
    [problem] = raised.value.problems
    assert ":4: mqtt.password: " in problem and fragment in problem


def test_secrets_stay_out_of_errors_and_repr(base_config: dict[str, Any], write_config: Any, credentials: Path) -> None:
    base_config["mqtt"]["password"] = "!credential mqtt-password"
    environ = {"CREDENTIALS_DIRECTORY": str(credentials)}
    config = load_config(write_config(base_config), environ=environ)
    for text in (repr(config), str(config), config.model_dump_json(), repr(config.mqtt)):
        assert PASSWORD not in text

    base_config["pipelines"][0]["publish"] = {"qos": 7}
    with pytest.raises(ConfigFileError) as raised:
        load_config(write_config(base_config), environ=environ)
    assert "publish.qos" in str(raised.value) and PASSWORD not in str(raised.value)


def test_a_secret_in_a_field_that_fails_is_shown_by_its_source(
    base_config: dict[str, Any], write_config: Any, credentials: Path
) -> None:
    (credentials / "box-id").write_text("box 1 s3cret")
    base_config["device_id"] = "!credential box-id"
    base_config["pipelines"][0]["name"] = "cam ${TOKEN}"
    environ = {"CREDENTIALS_DIRECTORY": str(credentials), "TOKEN": "tok-123456", "SHORT": "etc"}
    base_config["pipelines"][0]["source"]["path"] = "/${SHORT}/video.mp4"
    path = write_config(base_config)
    with pytest.raises(ConfigFileError) as raised:
        load_config(path, environ=environ)
    assert all(problem.startswith(f"{path}:") for problem in raised.value.problems)  # "etc" not masked there
    text = str(raised.value)
    assert "'!credential box-id' cannot be an MQTT topic level" in text
    assert "'cam ${TOKEN}' cannot be an MQTT topic level" in text
    assert "s3cret" not in text and "tok-123456" not in text


def test_a_misspelt_secret_key_is_reported_without_its_value(base_config: dict[str, Any], write_config: Any) -> None:
    base_config["mqtt"]["pasword"] = PASSWORD
    with pytest.raises(ConfigFileError) as raised:
        load_config(write_config(base_config), environ={})
    assert raised.value.problems[0].endswith(": mqtt.pasword: unknown field; did you mean 'password'?")
    assert PASSWORD not in str(raised.value)


def test_yaml_errors_do_not_quote_the_line(write_config: Any) -> None:
    path = write_config(f"device_id: box\nmqtt:\n  password: {PASSWORD}: x\n")
    with pytest.raises(ConfigFileError) as raised:
        load_config(path, environ={})
    assert raised.value.problems[0].startswith(f"{path}:3: not valid YAML: mapping values are not allowed here")
    assert PASSWORD not in str(raised.value)
