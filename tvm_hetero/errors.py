"""Errors a user can cause. The CLI prints them as one line; anything else is a bug."""


class HeteroError(Exception):
    """Base class of every user-facing error of tvm_hetero."""


class ModelError(HeteroError):
    """A model cannot be loaded or imported (missing, corrupt, unsupported op, dynamic shape)."""


class DeviceError(HeteroError):
    """A device string is malformed, or a device's runtime is absent."""


class PlacementError(HeteroError):
    """A placement does not match the model's layers or the device set."""


class BuildError(HeteroError):
    """Building a placed module failed."""


class InputError(HeteroError):
    """Inputs given to a compiled model do not match its input signature."""


def error_message(err: BaseException) -> str:
    """The meaningful line of an exception's text: TVM errors put the message last, after a
    C++ traceback, so the last non-empty line that is not a traceback frame."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    message = next((ln for ln in reversed(lines) if not ln.startswith(("File ", "at "))), "")
    return message or type(err).__name__


def _register_with_tvm_ffi() -> None:
    """Let these errors cross TVM's FFI (e.g. out of a pass) with their own type."""
    import tvm_ffi

    for cls in (HeteroError, ModelError, DeviceError, PlacementError, BuildError, InputError):
        tvm_ffi.register_error(cls.__name__, cls)


_register_with_tvm_ffi()
