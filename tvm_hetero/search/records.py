"""Tuning records: an append-only JSON-lines file, one measured candidate per line.

Each line is self-contained::

    {"format": "tvm_hetero.record", "version": 1, "tvm": "0.27.0.post1",
     "model": "<model fingerprint>", "devices": "<device-set fingerprint>",
     "placement": {"conv2d_0": "cpu", ...}, "result": {"error": "ok", "latencies_ms": [...]},
     "time": "2026-11-29T21:00:00+00:00", "tags": {"strategy": "xgb", "source": "xgb"}}

``tags`` is optional (who proposed the candidate). A record tagged ``"source": "retime"`` is a
finalist timed again, alternately with the others of its ``"retime"`` group, after the search
(see :func:`~tvm_hetero.search.tune`): it is kept beside the placement's measurement, which a
resumed search reuses as it was, and it is the placement's figure for :meth:`PlacementRecords.best`.

Every line is flushed and fsynced before ``commit`` returns, so an acknowledged record survives
a killed process. On load, a line that does not parse (a writer killed mid-line) is skipped with
a warning; records of another model, device set or TVM version are ignored with a notice.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from typing import Iterator

from ..errors import HeteroError, error_message
from ..measure.result import MeasureResult
from ..placement import Placement
from ..schemas import RECORD, validation_error

logger = logging.getLogger(__name__)

FORMAT = "tvm_hetero.record"
VERSION = 1
RETIME_SOURCE = "retime"


def _tvm_version() -> str:
    import tvm

    return str(tvm.__version__)


class PlacementRecords:
    """The records of one model on one device set, backed by a JSON-lines file.

    Parameters
    ----------
    path : str
        The records file; created when missing.
    model_fingerprint, devices_fingerprint : str
        Which records belong here (:meth:`Model.fingerprint`, :meth:`DeviceSet.fingerprint`).
    """

    def __init__(self, path: str, model_fingerprint: str, devices_fingerprint: str):
        self.path = os.fspath(path)
        self.model = model_fingerprint
        self.devices = devices_fingerprint
        self.tvm = _tvm_version()
        self._records: dict[str, tuple[Placement, MeasureResult]] = {}
        self._tags: dict[str, dict] = {}  # placement key -> tags of its record
        self._retimed: dict[str, tuple[Placement, MeasureResult, dict]] = {}
        self.skipped_lines = 0
        self.truncated = False
        self.foreign_records = 0
        self._load()

    @staticmethod
    def key(placement: Placement) -> str:
        return placement.key()

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        try:
            with open(self.path, encoding="utf-8") as handle:
                lines = handle.read().split("\n")
        except (OSError, UnicodeDecodeError) as err:
            raise HeteroError(f"cannot read records file {self.path}: "
                              f"{error_message(err)}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                problem = validation_error(data, RECORD)
                if problem:
                    raise ValueError(f"not a tvm_hetero record: {problem}")
                if (data["model"], data["devices"], data["tvm"]) != \
                        (self.model, self.devices, self.tvm):
                    self.foreign_records += 1
                    continue
                placement = Placement.from_json(data["placement"], self.path)
                result = MeasureResult.from_json(data["result"])
            except (ValueError, KeyError, TypeError, HeteroError) as err:
                self.skipped_lines += 1
                self.truncated = number == len(lines) or self.truncated
                logger.info("%s:%d: skipping an unreadable record (%s)", self.path, number,
                            "truncated" if number == len(lines) else err)
                continue
            self._store(placement, result, dict(data.get("tags") or {}))
        if self.skipped_lines and self._records:  # (with nothing usable the caller reports it)
            logger.warning("%s: skipped %d unreadable record line(s)%s", self.path,
                           self.skipped_lines, ", the last one truncated" if self.truncated
                           else "")
        if self.foreign_records:
            logger.info("%s: ignored %d record(s) of another model, device set or TVM version",
                        self.path, self.foreign_records)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, placement: Placement) -> bool:
        return self.key(placement) in self._records

    def get(self, placement: Placement) -> MeasureResult | None:
        found = self._records.get(self.key(placement))
        return found[1] if found else None

    def records(self) -> Iterator[tuple[Placement, MeasureResult]]:
        """The measurements, in the order they were first made (re-timings: :meth:`final`)."""
        return iter(list(self._records.values()))

    def tags(self, placement: Placement) -> dict:
        """The tags committed with a placement's record (e.g. the strategy that proposed it)."""
        return dict(self._tags.get(self.key(placement), {}))

    def commit(self, placement: Placement, result: MeasureResult,
               tags: dict | None = None) -> None:
        """Append one record; it is on disk (fsynced) when this returns."""
        record = {
            "format": FORMAT, "version": VERSION, "tvm": self.tvm, "model": self.model,
            "devices": self.devices, "placement": placement.assignment,
            "result": result.to_json(),
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        if tags:
            record["tags"] = tags
        line = json.dumps(record, sort_keys=False)
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        with open(self.path, "a+b") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() > 0:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":  # a previous writer died mid-line
                    handle.write(b"\n")
            handle.write(line.encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        self._store(placement, result, dict(tags or {}))

    def _store(self, placement: Placement, result: MeasureResult, tags: dict) -> None:
        key = self.key(placement)
        if tags.get("source") == RETIME_SOURCE:
            self._retimed[key] = (placement, result, tags)
        else:
            self._records[key] = (placement, result)
            self._tags[key] = tags

    def retimed(self, placement: Placement) -> tuple[MeasureResult, dict] | None:
        """The latest re-timing of a placement and its tags (with its ``"retime"`` group)."""
        found = self._retimed.get(self.key(placement))
        return (found[1], dict(found[2])) if found else None

    def final(self) -> Iterator[tuple[Placement, MeasureResult]]:
        """Each placement with its figure: its re-timing when it has one, else its
        measurement."""
        out = {key: (p, r) for key, (p, r) in self._records.items()}
        out.update({key: (p, r) for key, (p, r, _) in self._retimed.items()})
        return iter(list(out.values()))

    def best(self, layers=None, devices=None) -> tuple[Placement, MeasureResult] | None:
        """The fastest valid placement (verified outputs; a re-timed one by its re-timing), or
        None. Given the model's `layers` and a `devices` set, only placements within its memory
        caps count (records do not depend on caps: they are checked against the caps given
        now)."""
        return min(self.valid(layers, devices), key=lambda pr: pr[1].median_ms, default=None)

    def valid(self, layers=None, devices=None) -> list[tuple[Placement, MeasureResult]]:
        """The valid placements with their figures (see :meth:`final`), those within
        `devices`' memory caps when `layers` are given (a placement of other layers or devices is
        kept: validating it says what is wrong)."""
        from ..build.memory import fits

        if layers is None:
            return [(p, r) for p, r in self.final() if r.ok]
        names = {layer.name for layer in layers}

        def within_caps(placement: Placement) -> bool:
            if set(placement.assignment) != names or \
                    not set(placement.assignment.values()) <= set(devices.names):
                return True
            return fits(layers, placement, devices)

        return [(p, r) for p, r in self.final() if r.ok and within_caps(p)]


HEADER_FORMAT = "tvm_hetero.records_header"


def header_path(records: str) -> str:
    """The header file beside a records file: ``runs/r.jsonl`` -> ``runs/r.header.json``."""
    return os.path.splitext(os.fspath(records))[0] + ".header.json"


def write_header(records: str, model, devices, reference: str | None = None,
                 reference_detail: str = "") -> str | None:
    """Write what the records are of beside them: the model's source (``zoo:NAME`` or the
    ONNX file's absolute path) with its input shapes, the devices with their memory caps, and
    (`reference`) what the candidates' outputs were checked against, e.g. ``onnxruntime``
    (`reference_detail`: its version, or why it was not used). Returns the path, or None for a
    model without a source to name (an in-memory model)."""
    from ..frontend.shape_ranges import ranged_shapes

    if not getattr(model, "source", ""):
        logger.info("no records header: the model was given in memory, not by a source")
        return None
    header = {"format": HEADER_FORMAT, "version": VERSION, "model": model.source,
              "input_shapes": ranged_shapes(model),
              "devices": devices.to_json()}
    if reference:
        header["reference"] = reference
        if reference_detail:
            header["reference_detail"] = reference_detail
    path = header_path(records)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(header, handle, indent=1)
        handle.write("\n")
    os.replace(tmp, path)
    return path


def read_header(records: str) -> dict | None:
    """The header beside `records` as ``{"model", "input_shapes", "devices", "reference"}``
    (devices a DeviceSet, reference None in headers written before it was recorded), or None
    when there is none.

    Raises
    ------
    HeteroError
        When the header exists but is not one.
    """
    from ..devices import DeviceSet
    from ..schemas import RECORDS_HEADER

    path = header_path(records)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HeteroError(f"records header {path} is unreadable: {error_message(err)}") from None
    problem = validation_error(data, RECORDS_HEADER)
    if problem:
        raise HeteroError(f"records header {path} is not a tvm_hetero records header: "
                          f"{problem}")
    return {"model": data["model"],
            "input_shapes": {k: tuple(v) for k, v in data["input_shapes"].items()},
            "devices": DeviceSet.from_json(data["devices"]),
            "reference": data.get("reference")}


def best_placement(records: str, model, devices, layers) -> Placement:
    """The fastest verified placement in a records file, for this model and device set, among
    those within the memory caps of `devices`.

    Parameters
    ----------
    records : str
        The records file.
    model : Model
    devices : DeviceSet
    layers : list of Layer
        The model's layers for `devices` (the caps are checked on them).

    Returns
    -------
    Placement

    Raises
    ------
    PlacementError
        The file is missing, or holds no usable record (the reason in the message).
    """
    from ..build.memory import describe_over_cap, over_cap
    from ..errors import PlacementError

    if not os.path.isfile(records):
        raise PlacementError(f"records file not found: {records}")
    database = PlacementRecords(records, model.fingerprint(), devices.fingerprint())
    best = database.best(layers, devices)
    if best is None:
        fastest = database.best()
        if fastest is not None:
            raise PlacementError(
                f"no verified record in {records} fits the memory caps given: the fastest "
                f"needs {describe_over_cap(over_cap(layers, fastest[0], devices))}")
        reason = (f"{database.foreign_records} record(s) are of another model, device set or "
                  "TVM version" if database.foreign_records else "none of them is a verified "
                  "measurement" if len(database) else "it holds no readable record")
        if database.skipped_lines:
            reason += f"; {database.skipped_lines} line(s) are not records"
        raise PlacementError(f"no usable record in {records}: {reason}")
    return best[0]
