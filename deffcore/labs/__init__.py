"""Stage 9, the paper's experiments as labs: each a module with a CLI subcommand and an app page.

interventions    norm interventions on Gemma-style blocks (Table S6)
pruning          Block Influence vs local Delta D_eff as skip rankings (Tables S16-S18)
residual_carry   character GPT with h_l = gamma h_{l-1} + block(h_{l-1}) (Table S14, Fig. S7)
dynamics         D_eff over training checkpoints (Figure 3)
aggregations     other aggregations of S and the three metrics (Figure S4, Table S11)
correlation_lab  a depth number across models against a per-model quantity (Tables S18, S20, S21)
gw_lens          Gromov-Wasserstein between layers beside CKA (Table S22)
pretrain         short-pretraining norm probes (Table S8)
figures, lens_figures, lens_tables   the figures and tables of the lab pages
"""
