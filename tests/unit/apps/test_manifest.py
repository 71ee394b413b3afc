from decimal import Decimal

import pytest

from fiduciary.apps import ManifestError

from .support import manifest

DCA = """---
id: dca
name: Dollar-cost averaging
hooks: [tick, result]
tier: slow
capabilities: [balance, buy]
permissions: [swap]
limits: {swap: 50}
config:
  approve: true
  errors: {sourceFail: retry, executeFail: pause}
  asset: ETH
---
Buy $25 of ETH each period.
"""


def test_a_manifest_is_parsed_with_its_instructions() -> None:
    m = manifest(DCA)
    assert m.id == "dca"
    assert m.hooks == frozenset({"tick", "result"})
    assert m.tier == "slow"
    assert m.limits == {"swap": Decimal(50)}
    assert m.config.errors.source_fail == "retry"
    assert m.config.errors.execute_fail == "pause"
    assert m.config.extra == {"asset": "ETH"}
    assert m.config.mode == "paper"
    assert m.instructions == "Buy $25 of ETH each period."
    assert m.needs_approval


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("hooks: [tick, result]", "app.md: hooks[1]: unknown hook 'tock'"),
        ("tier: slow", "app.md: tier: unknown tier 'glacial'"),
        ("capabilities: [balance, buy]", "app.md: capabilities[1]: no capability named 'sell'"),
        ("permissions: [swap]", "app.md: permissions[0]: 'borrow' is not an operation"),
        ("limits: {swap: 50}", "app.md: limits.swap: must be a non-negative USD amount"),
        ("  errors: {sourceFail: retry, executeFail: pause}", "config.errors.sourceFail: 'again'"),
        ("name: Dollar-cost averaging", "app.md: colour: unknown field"),
    ],
)
def test_errors_name_the_field(change: str, message: str) -> None:
    replacement = {
        "hooks: [tick, result]": "hooks: [tick, tock]",
        "tier: slow": "tier: glacial",
        "capabilities: [balance, buy]": "capabilities: [balance, sell]",
        "permissions: [swap]": "permissions: [borrow]",
        "limits: {swap: 50}": "limits: {swap: -1}",
        "  errors: {sourceFail: retry, executeFail: pause}": "  errors: {sourceFail: again}",
        "name: Dollar-cost averaging": "colour: blue",
    }[change]
    with pytest.raises(ManifestError) as caught:
        manifest(DCA.replace(change, replacement))
    assert message in str(caught.value)


def test_an_app_without_permissions_or_limits_needs_no_approval() -> None:
    text = DCA.replace("permissions: [swap]\n", "").replace("limits: {swap: 50}\n", "")
    assert not manifest(text).needs_approval


def test_frontmatter_is_required() -> None:
    with pytest.raises(ManifestError, match=r"app\.md: frontmatter"):
        manifest("# just markdown\n")
