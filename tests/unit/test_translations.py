"""The lab extension's shipped translation: complete, faithful to its placeholders, and served.

Every string the extension shows goes through its translator (``labextension/src/i18n.ts``);
the French catalog must have each of them (and nothing stale), keep each ``%1``
placeholder, give both forms of each plural, and JupyterLab's server must hand it out
under the extension's domain once the French language pack is installed.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points

import pytest

from tests.support.lab_strings import DOMAIN, SOURCES, differences, load_catalog, messages

LOCALE = "fr_FR"
#: Words French writes as English does (names); any other text left in English is a miss.
SAME_IN_FRENCH = {"Local", "MatrixLab", "Docker OK", "agent", "Runner %1", "Session"}


def test_the_extension_translates_under_its_domain() -> None:
    i18n = (SOURCES / "i18n.ts").read_text(encoding="utf-8")
    assert f"export const DOMAIN = '{DOMAIN}';" in i18n
    assert len(messages()) > 150  # the extractor finds the strings (a broken regex finds none)


def test_the_french_catalog_has_every_string_and_nothing_stale() -> None:
    missing, stale = differences(LOCALE)
    assert not missing, (
        f"strings without a French translation: {missing}; add them to the catalog "
        "(python -m tests.support.lab_strings fr_FR lists them)"
    )
    assert not stale, f"translations of strings the extension no longer shows: {stale}"


def test_each_translation_keeps_its_placeholders_and_plural_forms() -> None:
    catalog = load_catalog(LOCALE)
    header = catalog[""]
    assert isinstance(header, dict)
    assert header["domain"] == DOMAIN and header["language"] == "fr-FR"
    for msgid, plural in messages().items():
        forms = catalog[msgid]
        assert isinstance(forms, list) and all(isinstance(f, str) and f for f in forms), msgid
        assert len(forms) == (2 if plural else 1), msgid
        wanted = sorted(re.findall(r"%\d", msgid))
        for form in forms:
            assert sorted(re.findall(r"%\d", form)) == wanted, (msgid, form)
        english = forms[0] == msgid and re.search(r"[a-z]{4}", msgid)
        assert not english or msgid in SAME_IN_FRENCH, f"left in English: {msgid}"


def test_jupyterlab_serves_the_catalog_under_the_extensions_domain() -> None:
    names = {entry.name for entry in entry_points(group="jupyterlab.locale")}
    assert DOMAIN in names, "the package does not register its locale entry point (reinstall)"
    translation = pytest.importorskip("jupyterlab_server.translation_utils")
    packs, _ = translation.get_language_packs()
    assert LOCALE in packs, "jupyterlab-language-pack-fr-FR is a test dependency (pip install)"
    data, message = translation.get_language_pack(LOCALE)
    assert not message.strip(), message
    assert data[DOMAIN]["Pending Plans"] == ["Plans en attente"]
