# Sweep figures (SupRank figs 6-8): the plot of a `kind: sweep` spec (its runs and table come from
# the plan and the table rule). Helpers live in common.smk.
