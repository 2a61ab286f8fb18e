"""A campaign cell names the strategy it runs: "default" (a scenario's or a block's) is each backend's own,
so the herd campaigns plan kip848/uniform beside classic/range, and kip848/range where a block asks for it."""

from __future__ import annotations

from experiments.campaign.model import find_campaign, load_campaign


def test_default_cells_are_named_for_each_backend_s_own_strategy(tmp_path):
    campaign = tmp_path / "mixed.toml"
    campaign.write_text('name = "mixed"\nrepetitions = 1\n\n[[matrix]]\nscenario = "demo-herd"\n'
                        'strategies = ["default", "range"]\nsweep = { "group.members" = [4] }\n')
    cells = load_campaign(campaign).cells
    assert sorted((cell.backend, cell.strategy) for cell in cells) == [
        ("classic", "range"), ("kip848", "range"), ("kip848", "uniform"), ("legacy", "range")]
    assert any(cell.key == "demo-herd-kip848-uniform-members-4" for cell in cells)
    kip848 = next(cell for cell in cells if cell.strategy == "uniform")
    assert 'group.strategy="uniform"' in kip848.overrides(1)


def test_the_kip848_campaign_runs_uniform_and_range_and_herd_quick_adds_range_as_a_second_line():
    kip848 = load_campaign(find_campaign("kip848")).cells
    assert {cell.strategy for cell in kip848} == {"uniform", "range"}
    quick = load_campaign(find_campaign("herd-quick")).cells
    assert {(cell.backend, cell.strategy) for cell in quick} == {
        ("legacy", "range"), ("classic", "range"), ("kip848", "uniform"), ("kip848", "range")}
