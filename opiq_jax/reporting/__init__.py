"""Reporting: statistics across seeds (IQM, bootstrap intervals), the figures and tables, live tracking.

The names below are public, beside ``opiq_jax.train`` and ``opiq_jax.load``: what a script needs to draw and
summarise results folders as the package's own figures do, and to record where a folder came from (the code's
revision and whether its tree was clean; commands without the machine's absolute paths). The paper's scripts in
``experiments/paper`` use nothing else of the package. Live tracking (``reporting.tracking``) is imported only
where it is used.
"""

from ..store.provenance import portable, source_revision
from .plotting import (
    area_under_median,
    check_one_experiment,
    curves,
    folder_title,
    group_styles,
    line_zorder,
    markdown_table,
    paper_name,
    paper_order,
    plot_folder,
    precision_text,
    save_curve_figure,
    setting_text,
    summary_table,
)
from .stats import (
    iqm,
    permutation_p,
    probability_of_improvement,
    probability_of_improvement_ci,
    stratified_bootstrap_ci,
    summarise,
)

__all__ = [
    "area_under_median", "check_one_experiment", "curves", "folder_title", "group_styles", "iqm", "line_zorder",
    "markdown_table", "paper_name", "paper_order", "permutation_p", "plot_folder", "portable", "precision_text",
    "probability_of_improvement", "probability_of_improvement_ci", "save_curve_figure", "setting_text",
    "source_revision", "stratified_bootstrap_ci", "summarise", "summary_table",
]
