"""What a reader sees: plots, the HTML report and summary.md of runs, findings in words, the campaign and results pages, the demo page."""
