"""A person's paste in the live view of a Docker sandbox, in a real headless browser (Debian's
chromium, the page's CSP enforced): the browser's clipboard is written through its own Clipboard
API (permission granted to the page's origin) and Ctrl+V pressed on the page, as a person does.

View-only: the page delivers nothing and the server refuses a paste posted anyway. In control: a
text over the clipboard's limit is refused with an error on the page naming the limit; a Unicode
multi-line text lands in the focused editor exactly (saved with Ctrl+S through the view, read
back byte-exact), the guest's CLIPBOARD and PRIMARY hold it, and the hand-over's person actions
list the paste (never its text) (:func:`tests.view.viewpage.paste_round_trip`; the VM's is in
test_view_vm.py).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from cubicle.orchestrator.sandbox import Sandbox
from tests.view.viewpage import paste_round_trip

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_paste_lands_exactly_in_control_and_not_at_all_when_view_only(
    page: Page, sandbox: Sandbox
) -> None:
    paste_round_trip(page, sandbox, timeout_s=30)
