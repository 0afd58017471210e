"""Parsing: the bytes a training job writes, read into records the analysis takes.

Belongs here: nvdlfw_inspect's statistics logs (`stats_log`, the parser's state; `stats_blocks`, the file handling;
`stats_scan`, a block's scan; `stats_names`, the names one piece of a live file hands to the next; `name_table`),
the compiled kernels (`_line_kernel`, `_name_kernel`, `_stats_kernel`, `_summary_kernel`, `_csv_kernel`) and which
implementation of them runs (`kernels`), the buffers kept between parses (`buffer_pool`), the metadata logs
(`metadata_log`), a log tree's file names (`log_files`), the join into layers and summarised series (`assemble`),
and the training scalars' file (`scalars_file`, with the learning-rate decay read while it is checked,
`lr_schedule`).
Must not be here: what a series means (policy/analysis/), live warnings (policy/live/), decisions
(policy/recommend/), and any web or database import. This package imports none of those (tests/test_layering.py).
"""
