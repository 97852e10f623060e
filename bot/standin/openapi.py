"""Validate requests against GitHub's OpenAPI description (a dereferenced subset)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def to_json_schema(schema: Any) -> Any:
    """OpenAPI 3.0 → JSON Schema: `nullable: true` becomes a `null` alternative."""
    if isinstance(schema, list):
        return [to_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {k: to_json_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


class OpenAPIValidator:
    def __init__(self, operations: dict[str, dict]) -> None:
        import jsonschema

        self._jsonschema = jsonschema
        self.operations: list[tuple[str, re.Pattern, str, dict]] = []
        for key, operation in operations.items():
            method, template = key.split(" ", 1)
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
            if template.endswith("{path}"):
                pattern = pattern[: -len("[^/]+")] + ".+"
            self.operations.append((method, re.compile(f"^{pattern}$"), key, operation))

    @classmethod
    def from_file(cls, path: Path | str) -> OpenAPIValidator:
        return cls(json.loads(Path(path).read_text())["operations"])

    def find(self, method: str, path: str) -> tuple[str, dict] | None:
        for op_method, pattern, key, operation in self.operations:
            if op_method == method and pattern.match(path):
                return key, operation
        return None

    def check_request(self, method: str, path: str, body: Any) -> list[str]:
        """Problems with this request (empty when it is what GitHub accepts)."""
        found = self.find(method, path)
        if found is None:
            return [f"{method} {path}: not an operation in the OpenAPI subset"]
        key, operation = found
        schema = operation.get("requestBody")
        if schema is None:
            return []
        if body is None:
            return [f"{key}: request body required"] if operation.get("requestBodyRequired") else []
        validator = self._jsonschema.Draft7Validator(to_json_schema(schema))
        return [f"{key}: {error.message}" for error in validator.iter_errors(body)]
