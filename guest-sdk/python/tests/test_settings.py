"""Settings decoded into dataclasses: a shape error names the key it failed
on, as a path from the top, and never the value."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

import pytest

import leasehold
from leasehold import SettingsError

SECRET = "s3cret-value"


class Mode(Enum):
    FAST = "fast"
    SAFE = "safe"


@dataclass
class Db:
    host: str
    port: int = 5432


@dataclass
class Cfg:
    region: str
    db: Db
    replicas: int = 1
    ratio: float = 0.5
    dry_run: bool = False
    exempt: List[str] = field(default_factory=list)
    labels: Dict[str, str] = field(default_factory=dict)
    mode: Mode = Mode.SAFE
    token: Optional[str] = None
    extra: Any = None


def failure(host, settings, decode=Cfg):
    host.set_settings(settings)
    with pytest.raises(SettingsError) as caught:
        leasehold.settings(decode)
    error = caught.value
    assert SECRET not in str(error) and SECRET not in repr(error.args)
    return error


def test_a_dataclass_is_decoded_field_by_field(host):
    host.set_settings(
        {
            "region": "eu",
            "db": {"host": "db1"},
            "ratio": 2,
            "exempt": ["a", "b"],
            "labels": {"team": "x"},
            "mode": "fast",
            "token": None,
            "extra": [1, {"k": 2}],
            "unknown": "ignored",
        }
    )
    cfg = leasehold.settings(Cfg)
    assert cfg == Cfg("eu", Db("db1", 5432), 1, 2.0, False, ["a", "b"], {"team": "x"}, Mode.FAST, None, [1, {"k": 2}])


@pytest.mark.parametrize(
    "settings, key, needle",
    [
        ({"db": {"host": "h"}}, "region", "missing"),
        ({"region": "eu"}, "db", "missing"),
        ({"region": "eu", "db": {}}, "db.host", "missing"),
        ({"region": SECRET, "db": {"host": "h", "port": SECRET}}, "db.port", "invalid type: a string, expected int"),
        ({"region": 7, "db": {"host": "h"}}, "region", "invalid type: a number, expected str"),
        ({"region": "eu", "db": {"host": "h"}, "replicas": True}, "replicas", "a boolean, expected int"),
        ({"region": "eu", "db": {"host": "h"}, "dry_run": "yes"}, "dry_run", "expected bool"),
        ({"region": "eu", "db": {"host": "h"}, "exempt": ["a", "b", 3]}, "exempt[2]", "a number, expected str"),
        ({"region": "eu", "db": {"host": "h"}, "exempt": SECRET}, "exempt", "a string, expected an array"),
        ({"region": "eu", "db": {"host": "h"}, "labels": {"team": [SECRET]}}, "labels.team", "an array"),
        ({"region": "eu", "db": [SECRET]}, "db", "an array, expected an object"),
        ({"region": "eu", "db": {"host": "h"}, "mode": SECRET}, "mode", "not one of the values of Mode"),
        ({"region": "eu", "db": {"host": "h"}, "token": 5}, "token", "a number, expected str or null"),
    ],
)
def test_a_shape_error_names_the_key_and_never_the_value(host, settings, key, needle):
    error = failure(host, settings)
    assert error.key == key
    assert needle in error.message, error.message
    assert f"key `{key}`" in str(error)


def test_callables_keep_working_and_name_a_missing_key(host):
    @dataclass
    class Region:
        region: str
        replicas: int = 1

    host.set_settings({"region": "eu", "replicas": 3})
    assert leasehold.settings(lambda d: Region(**d)) == Region("eu", 3)
    error = failure(host, {"token": SECRET}, lambda d: d["region"])
    assert error.key == "region" and error.message == "missing"
    error = failure(host, {"token": SECRET}, lambda d: int(d["token"]))
    assert error.key is None and error.message == "ValueError"
    error = failure(host, {"regoin": SECRET}, lambda d: Region(**d))
    assert error.key is None


def test_a_dataclasss_own_check_is_reported_without_its_text(host):
    @dataclass
    class Checked:
        url: str

        def __post_init__(self):
            if not self.url.startswith("https://"):
                raise ValueError(f"not https: {self.url}")

    error = failure(host, {"url": SECRET}, Checked)
    assert error.key is None and error.message == "ValueError"


def test_settings_that_are_not_an_object_fail_as_a_whole(host):
    host._settings = "[1, 2]"
    with pytest.raises(SettingsError) as caught:
        leasehold.settings(Cfg)
    assert caught.value.key is None and "expected an object" in str(caught.value)
