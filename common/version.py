"""Kale's version: the one place it is written.

The wheel's metadata (pyproject's ``dynamic = ["version"]``), ``kale --version``, the
``kale_build_info`` metric, the Makefile's image tags and the images' labels all read this
attribute; the manifests and ``release.yaml`` name images at this tag, and a test keeps them
equal. It is an attribute of the source, not installed metadata, so a source checkout that
was never installed (or whose install is stale) reports the version of the code it runs.
CHANGELOG.md says what each version changed.
"""

__version__ = "0.1.0"
