"""The decode spec on the connector config (config/decoding.py): converters, header
rules and the transform chain are read once with the config, their errors reported
with the config's own, and what executors receive is a small frozen value."""

import pickle

import pytest

from floeline.config import config_from_dict
from floeline.config.decoding import (
    AVRO_CONVERTER, JSON_CONVERTER, SIMPLE_HEADER_CONVERTER, ConverterSpec, DecodeSpec, HeaderSpec)
from floeline.errors import ConfigError
from floeline.records.support import check_supported
from floeline.retry import RetryPolicy

BASE = {"name": "orders-sink", "topics": "orders"}
T = "org.apache.kafka.connect.transforms."


def problems(settings: dict) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict({**BASE, **settings})
    return str(info.value)


def test_a_bad_converter_setting_is_a_config_error_naming_the_key_and_the_fix():
    text = problems({"value.converter": "com.example.Nope", "key.converter": JSON_CONVERTER,
                     "key.converter.schemas.enable": "yes"})
    assert text.startswith("invalid connector config (2 problems)")
    assert "value.converter=com.example.Nope is not a converter floeline knows; supported: " in text
    assert "key.converter.schemas.enable='yes' is not a boolean; accepted values: true, false" in text
    assert "value.converter=io.confluent.connect.avro.AvroConverter needs " \
           "value.converter.schema.registry.url" in problems({"value.converter": AVRO_CONVERTER})


def test_a_bad_transform_setting_is_a_config_error_with_the_others():
    text = problems({"transforms": "t,u", "transforms.t.type": T + "HoistFeld$Value",
                     "transforms.u.type": T + "Filter", "transforms.u.negate": "maybe",
                     "buffer.flush.time": "-1"})
    assert "transforms.t.type=org.apache.kafka.connect.transforms.HoistFeld$Value: unknown transform " \
           "class for alias 't' (did you mean org.apache.kafka.connect.transforms.HoistField$Value?)" in text
    assert "transforms.u.negate='maybe' is not a boolean" in text
    assert "buffer.flush.time" in text  # reported together with the config's other problems


def test_bad_header_settings_are_config_errors():
    text = problems({"header.converter": "com.example.X", "snowflake.feature.structured.headers": "yes"})
    assert "header.converter=com.example.X is not a header converter floeline knows" in text
    assert "snowflake.feature.structured.headers='yes' is not a boolean" in text


def test_a_transforms_own_options_are_checked_before_spark():
    config = config_from_dict({**BASE, "transforms": "c", "transforms.c.type": T + "Cast$Value",
                               "transforms.c.spec": "age:int33"})
    with pytest.raises(ConfigError, match="transforms.c.spec='age:int33' names an unknown type 'int33'"):
        check_supported(config)


def test_the_decode_spec_is_small_frozen_and_picklable_without_secrets():
    config = config_from_dict({
        **BASE, "value.converter": AVRO_CONVERTER,
        "value.converter.schema.registry.url": "http://registry:8081",
        "transforms": "wrap", "transforms.wrap.type": "HoistField$Value", "transforms.wrap.field": "v",
        "snowflake.private.key": "SECRET-KEY", "errors.retry.timeout": "5000"})
    spec = config.decoding
    assert spec.value == ConverterSpec("value", AVRO_CONVERTER, (("schema.registry.url", "http://registry:8081"),))
    assert spec.key == ConverterSpec("key")
    assert spec.headers == HeaderSpec(SIMPLE_HEADER_CONVERTER, False)
    (wrap,) = spec.transforms.transforms
    assert (wrap.alias, wrap.class_name, dict(wrap.options)["field"]) == ("wrap", T + "HoistField$Value", "v")
    assert spec.registry_retry == RetryPolicy(5.0, RetryPolicy().max_delay_s) == config.retry
    shipped = pickle.dumps(spec)
    assert b"SECRET-KEY" not in shipped and pickle.loads(shipped) == spec
    with pytest.raises(AttributeError):
        spec.value = ConverterSpec("value")  # frozen
    assert config_from_dict(BASE).decoding == DecodeSpec()
