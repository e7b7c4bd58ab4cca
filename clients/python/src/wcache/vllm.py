"""wcache.vllm: the first import path of wcache.engines.vllm (the vLLM
integration), kept for code and installs that name it. It is the same module
object, so attributes set on one are seen through the other."""

import sys as _sys

from .engines import vllm as _engine

_sys.modules[__name__] = _engine
