"""The settings' parts: every ``INFERSIGHT_*`` variable is a field of exactly one part.

``config.parts`` declares them; each role composes the parts it reads, by inheritance, so a
variable keeps its one name and default in every role: ``infersight.cli.settings.Settings`` (the
store's commands), ``infersight.cli.settings.SidecarSettings`` (``infersight sidecar``) and
``api.settings.ApiSettings`` (``infersight serve``). This package depends on ``core`` only, so
the sidecar reads its settings without loading SQLAlchemy.
"""
