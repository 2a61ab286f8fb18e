"""Campaigns: a matrix of scenarios x backends x strategies x swept settings, each cell repeated with its
own recorded seed, run into one folder with a manifest, summarised in one Spark pass, and reported with
the spread of every figure (experiments/campaigns/ holds the built-in campaign files)."""

from experiments.campaign.execute import CampaignMismatch, completed_run_dirs, execute
from experiments.campaign.manifest import Manifest, is_campaign_dir
from experiments.campaign.model import Campaign, builtin_names, find_campaign, load_campaign

__all__ = ["Campaign", "CampaignMismatch", "Manifest", "builtin_names", "completed_run_dirs", "execute",
           "find_campaign", "is_campaign_dir", "load_campaign"]
