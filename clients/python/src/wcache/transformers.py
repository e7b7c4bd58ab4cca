"""wcache.transformers: the first import path of wcache.engines.transformers (the Hugging Face transformers
integration), kept for code and installs that name it. It is the same module
object, so attributes set on one are seen through the other."""

import sys as _sys

from .engines import transformers as _engine

_sys.modules[__name__] = _engine
