"""A campaign's statistics, from its runs' summaries (pandas, no Spark): each cell's figures with n, median and
spread (`campaign_stats`), the exact tests of two medians and their false discovery rate (`inference`), the
claims a campaign file declares (`claims`), the power a campaign is sized by (`power`), the utilisation sweep
(`load_sweep`), and the names the pages give the measures (`measures`, `measure_names`)."""
