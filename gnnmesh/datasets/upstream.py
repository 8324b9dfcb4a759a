"""Where each registered dataset's files come from: per file, the public upstream copy at a
pinned commit and the sha256 of the bytes it serves. ``gnnmesh datasets --fetch`` reads
this table; the loaders never do.

URLs are raw GitHub URLs (``https://raw.githubusercontent.com/OWNER/REPO/COMMIT/PATH``).
``$GNNMESH_MIRROR`` replaces the ``https://raw.githubusercontent.com`` part, so a mirror
(or a test server) only has to serve the same ``OWNER/REPO/COMMIT/PATH`` layout.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

from ..errors import ConfigError

GITHUB_RAW = "https://raw.githubusercontent.com"
MIRROR_VARIABLE = "GNNMESH_MIRROR"


@dataclass(frozen=True)
class UpstreamFile:
    path: str        # where the loaders read it, relative to the data root
    source: str      # OWNER/REPO/COMMIT/PATH upstream
    sha256: str      # of the bytes upstream serves
    gzip: bool       # upstream serves plain text, which the data root keeps gzip-compressed

    def url(self) -> str:
        return f"{mirror().rstrip('/')}/{self.source}"


def mirror() -> str:
    """Where the pinned files are fetched from: $GNNMESH_MIRROR, checked to be an http(s) or
    file URL, else GitHub's raw host."""
    base = os.environ.get(MIRROR_VARIABLE) or GITHUB_RAW
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https", "file") or not (parts.netloc or parts.scheme == "file"):
        raise ConfigError(f"environment variable {MIRROR_VARIABLE}: {base!r} is not an http(s) or file URL "
                          f"(e.g. https://mirror.example.org, serving OWNER/REPO/COMMIT/PATH)")
    return base


@dataclass(frozen=True)
class Upstream:
    files: tuple
    partial: str = ""   # what no pinned upstream copy provides, said after a fetch


def _file(local: str, source: str, sha256: str, gzip: bool = False) -> UpstreamFile:
    """The file served at ``source``, stored under its own name in the folder ``local``
    (with '.gz' appended when ``gzip``)."""
    name = source.rsplit("/", 1)[1]
    return UpstreamFile(f"{local}/{name}{'.gz' if gzip else ''}", source, sha256, gzip)


def _folder(local: str, source: str, hashes: dict, gzip: bool = False) -> tuple:
    """The files ``hashes`` names (upstream name -> sha256), served in the folder ``source``."""
    return tuple(_file(local, f"{source}/{name}", sha, gzip) for name, sha in hashes.items())


_PLANETOID = "kimiyoung/planetoid/af6abf468a772cc055bec88c52e4d6f51b7c37e3/data"
_MUSAE = "benedekrozemberczki/datasets/dd4394c41c929dfd93688458be1a4f113e4f9e39"
_DEMIRCI = ("gunduzvd/Scalable-Graph-Convolutional-Network-Training-on-Distributed-Memory-Systems/"
            "8f10e28dd3771e6b488c846c767d262205321b91/GPU")


def _twitch(lang: str, features: str, edges: str, target: str) -> Upstream:
    json_name = f"{lang}.json" if lang in ("DE", "TW") else f"{lang}_features.json"
    return Upstream(_folder(f"twitch/{lang}", f"{_MUSAE}/twitch/{lang}", {
        f"{lang}_edges.csv": edges, f"{lang}_target.csv": target, json_name: features}, gzip=True))


UPSTREAM = {
    "cora": Upstream(_folder("planetoid/raw", _PLANETOID, {
        "ind.cora.x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
        "ind.cora.y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
        "ind.cora.tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
        "ind.cora.ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
        "ind.cora.allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
        "ind.cora.ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
        "ind.cora.graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
        "ind.cora.test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    })),
    "citeseer": Upstream(_folder("planetoid/raw", _PLANETOID, {
        "ind.citeseer.x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
        "ind.citeseer.y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
        "ind.citeseer.tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
        "ind.citeseer.ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
        "ind.citeseer.allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
        "ind.citeseer.ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
        "ind.citeseer.graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
        "ind.citeseer.test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    })),
    "pubmed": Upstream(_folder("pubmed_partial/raw", _PLANETOID, {
        "ind.pubmed.x": "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33",
        "ind.pubmed.y": "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3",
        "ind.pubmed.tx": "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d",
        "ind.pubmed.ty": "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd",
        "ind.pubmed.ally": "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e",
        "ind.pubmed.graph": "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9",
        "ind.pubmed.test.index": "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5",
    }), partial="ind.pubmed.allx has no pinned checksum and is not fetched, so the graph has "
                "no node features"),
    "facebook": Upstream(_folder("facebook_page_page", f"{_MUSAE}/facebook_large", {
        "facebook_edges.csv": "7c50d8f02a75cc0829577814a1fc14535164daa38d79c3612340c9e9cdbd4022",
        "facebook_features.json": "ea870537646a93642a0008d38aa9bfeff02018070ba97b1f3f469d9622626436",
        "facebook_target.csv": "7bd96eafea3c2ca40f44bfa9e73642194696c21e38c7b29ed409c32ad14075cd",
    }, gzip=True)),
    "github": Upstream((_file(
        "github_musae",
        "bkamins/JuliaForDataAnalysis/1b896296980ca30b9d02a0229fb0648df86d8532/git_web_ml.zip",
        "56c0c1c2c460dc4c7bf89357b1fec020f45e2ecebab81d131d073b10e28ec031"),)),
    "deezer": Upstream((_file(
        "deezer_europe", "mabeerkhan/Intermediate-Programing/"
        "ca3fc0aab07a8822a3a9f40d89022383ff4292d6/data/deezer_europe.zip",
        "c8633cd1b543a9d730d7bc9c18c43e09bb9d668e4c2c52eabade40285f5d5bea"),)),
    "lastfm": Upstream(_folder("lastfm_asia", f"{_MUSAE}/lasftm_asia", {  # upstream's spelling
        "lastfm_asia_edges.csv": "548eacff61bff564ab5007831fa4a7a30e1a3956075ffd24e43310ed33555842",
        "lastfm_asia_target.csv": "91f19215f6eca8321feec038bd32900cf13fd4f7e041a9976cf202807c72ac16",
    }, gzip=True), partial="lastfm_asia_features.json has no pinned checksum and is not "
                           "fetched, so the graph has no node features"),
    "twitch-de": _twitch(
        "DE", "7b39c42570f05cd46017c765df8d8a1bc03f19787c3eb0f9684f50a52476ae3a",
        "54feaf3e3e70a485fe07f8611e4d2677841b97f77b8358204bcf4a48cc884d86",
        "2188f58a093bb9db363d3eaf7c3a52c2adc8ff6b23cbcb4f53875f87061c0321"),
    "twitch-engb": _twitch(
        "ENGB", "efcd846f7b687d299c9c674f3cda43cd70de8307d2558895bddd3645eb38d500",
        "5ea4d7f7267454e9523577eb2a9b4dcb7a22dd660a548240f01b815d08e0e3cc",
        "e9d51399878216d2dd662b0a152b602cccde7b5cbb8452cb91d9379f64114443"),
    "twitch-es": _twitch(
        "ES", "598a610ef7e0469c5ad800c11f7ad89797e6a27d7d66b670782a5516cc344725",
        "17801d2cc45fc4909a431ce7a190c0565d4af87b0548ca7705cf2bef7da4c884",
        "f843427bae58289100e78c6c211fa4a1ae0d5fbf2c665841df9e390b00dcffb5"),
    "twitch-fr": _twitch(
        "FR", "b6ecbefd5606f46d30a9b4be7b574e5427d9e0314f1bd6a1861942ae718d3573",
        "9924263f7e8edaa7278dcbc37bd90c8712cb0ea1726d85e054a5588b7959f887",
        "dd0a9e7ba565cbb95ae66003892709742bd08c26387656e3e235fc25205663b4"),
    "twitch-ptbr": _twitch(
        "PTBR", "12ba6c60ce009b1bec8fd5ad110539775d14a2b96011df19ba9f72ad1393a406",
        "b72d93a3c8a82883771a2f3822fce229885fa0d40367fb105c0535fb36c773b9",
        "ecba7d1287e72ae7c3f42c922be475283288c0c67346245c72109690460444bd"),
    "twitch-ru": _twitch(
        "RU", "c5357468471545a6169de463ef706f321446dc667d9d62d49e68c0b3feef9675",
        "fd307587a550289f746056ea12a7336171ab2053c9e08c42dba77499126ca5b2",
        "db7617528355be994352e491e7b25d060fed466d0d81c09cadd90fa10f15c071"),
    "twitch-tw": _twitch(
        "TW", "9508cc55f4b891018f278df4cec40d622aba2b04c1bca9451fd9e8ce11321c7b",
        "47c986023f1f434f76026ddfb3ab544be24849011400c99402083d06d3dfa017",
        "65b75f23be40140d2e326813c3f81419f1a94aa1091acfc0279f0403be8165f7"),
    "email-eu-core": Upstream((
        _file("email-Eu-core", "ebrahimirannezhad/AIi_InSocialNetwork/"
              "6ec2b87a32e7e06caa16b1cff48f3c248088cd2e/email-Eu-core.txt.gz",
              "4b47acdb80197b085fe63c819c357ae488131ee904ed93d1b219a68b0f9e245f"),
        _file("email-Eu-core", "rameshkumarnunna/Social-Network-Analysis---R/"
              "cc2f2c32fd88833cd4a20c24024e56ba54d5cc62/email-Eu-core-department-labels.txt",
              "015c8cee3eb7d15a03d1c5ceed87a9dc0964c978c16db01542e5ff8b93741c6d", gzip=True))),
    "slashdot": Upstream((_file(
        "soc-Slashdot0902", "AllenDowney/ProbablyOverthinkingIt/"
        "16d5c6092742423ff4c34f0323b27ce003d589a6/soc-Slashdot0902.txt.gz",
        "65072f0a2d98a444967bf3b8379a87e03292f2f9f8924f4fe470ddd047c95553"),)),
    "luxembourg-osm": Upstream((_file(
        "luxembourg_osm",
        "fahaizhong/graphdata/1800816d861ea15a37281e19a28b2d1cf7a7c633/luxembourg_osm.mtx",
        "eb75caea9ccf73b6af18e0f72a885e37eb036c3c450c4575734b3243ae28e9b4", gzip=True),)),
    "karate": Upstream((_file(
        "gunduzvd_mtx", f"{_DEMIRCI}/SHP/data/karate/karate.mtx",
        "074a23e758ebeddb766fb08f617ee4bc5debc8d2564287c3e1e24f5ccdb77813"),)),
    "gemat11": Upstream((_file(
        "gunduzvd_mtx", f"{_DEMIRCI}/hypergraph/data/gemat11/gemat11.mtx",
        "b5f826b248b398085b2644b9caa964c224be51a947a823066e13e7edfa6cc279", gzip=True),)),
}
