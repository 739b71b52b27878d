"""JSON schemas of the files users pass in: placements, records and the records' header. All
are plain JSON, never pickles; every file is validated against its schema before anything in it
is used."""

from __future__ import annotations

NAME = {"type": "string", "minLength": 1, "maxLength": 256}

PLACEMENT_MAPPING = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": NAME,
    "additionalProperties": NAME,
}

PLACEMENT = {
    "oneOf": [
        {
            "type": "object",
            "required": ["placement"],
            "properties": {
                "format": {"const": "tvm_hetero.placement"},
                "version": {"type": "integer", "minimum": 1},
                "model": {"type": "string"},
                "devices": {"type": "array", "items": NAME},
                "placement": PLACEMENT_MAPPING,
            },
        },
        {  # a bare {layer: device} mapping
            "allOf": [PLACEMENT_MAPPING, {"not": {"required": ["placement"]}}],
        },
    ],
}

RESULT = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"enum": ["ok", "build_error", "build_timeout", "run_error", "run_timeout",
                           "wrong_answer", "memory_exceeded"]},
        "latencies_ms": {"type": "array", "items": {"type": "number", "minimum": 0}},
        "build_s": {"type": "number"},
        "run_s": {"type": "number"},
        "message": {"type": "string"},
        "max_error": {"type": "number"},
        "rounds_ms": {"type": "array", "items": {"type": "number", "minimum": 0}},
    },
}

RECORD = {
    "type": "object",
    "required": ["format", "version", "tvm", "model", "devices", "placement", "result"],
    "properties": {
        "format": {"const": "tvm_hetero.record"},
        "version": {"type": "integer", "minimum": 1},
        "tvm": {"type": "string"},
        "model": {"type": "string"},
        "devices": {"type": "string"},
        "placement": PLACEMENT_MAPPING,
        "result": RESULT,
        "time": {"type": "string"},
        "tags": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
    },
}

RECORDS_HEADER = {
    "type": "object",
    "required": ["format", "version", "model", "input_shapes", "devices"],
    "properties": {
        "format": {"const": "tvm_hetero.records_header"},
        "version": {"type": "integer", "minimum": 1},
        "model": {"type": "string", "minLength": 1},
        "input_shapes": {"type": "object", "additionalProperties": {
            "type": "array", "items": {"anyOf": [
                {"type": "integer", "minimum": 1},
                # a dynamic dimension with its range: NAME=MIN:MAX:OPT
                {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*=[0-9]+:[0-9]+:[0-9]+$"}]}}},
        "devices": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "target", "device_type", "device_id"],
            "properties": {"name": NAME, "target": {"type": "object", "required": ["kind"]},
                           "device_type": {"type": "string"},
                           "device_id": {"type": "integer", "minimum": 0},
                           "memory_cap": {"type": "integer", "minimum": 0}}}},
        "reference": {"type": "string"},
        "reference_detail": {"type": "string"},
    },
}



def validation_error(data, schema) -> str | None:
    """None when `data` matches `schema`, else a one-line reason."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema)
                                             .iter_errors(data))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message}" + (f" (at {where})" if where else "")
