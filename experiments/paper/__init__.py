"""The paper's figures, tables and tabular theory: Figures 2, 3, 5, 6, 7 and 8, the appendix's M comparison and
counterexamples, and tabular OPIQ against UCB-H."""
