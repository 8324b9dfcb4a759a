"""Partitioned datasets on disk: written once by ``gnnmesh partition --write-parts DIR``,
then every rank of ``gnnmesh train --parts DIR`` reads its own folder and nothing else. This
package is what every kind shares (the directory, the manifest, the checked reader, what the
ranks check together); each kind's writer lives with its strategy (the registry's ``parts``)."""

from .store import MANIFEST, Parts, RankPart, open_parts

__all__ = ["open_parts", "Parts", "RankPart", "MANIFEST"]
