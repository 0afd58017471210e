"""The run_facets_configs migration fills the runs list's facet columns from the metadata of runs stored before it
(SQLite and PostgreSQL), and its downgrade drops them again."""

from __future__ import annotations

import json

from sqlalchemy import Engine, inspect, text

from fp8_policy.db.migrate import downgrade, upgrade

BEFORE = "summary_precision_mix"
METADATA = [
    {"gpu": "NVIDIA H100 80GB HBM3", "recipe": "DelayedScaling", "te_version": "v2.8.0", "git_commit": "ABC1234"},
    {"gpu_name": "B200", "fp8_recipe": "MXFP8BlockScaling"},
    {},
    {"gpu": {"nested": True}, "recipe": 7},
]


def test_existing_runs_get_their_facets(fresh_url: str, fresh_engine: Engine) -> None:
    upgrade(fresh_url, BEFORE)
    with fresh_engine.begin() as connection:
        for k, metadata in enumerate(METADATA):
            connection.execute(
                text(
                    "INSERT INTO runs (project, status, sha256, upload_bytes, upload_path, metadata, created_at,"
                    " rank_count, layer_count, series_count, point_count, lines_read, lines_skipped, lines_blank,"
                    " lines_duplicated) VALUES ('p', 'ready', :sha, 1, '', :metadata, CURRENT_TIMESTAMP,"
                    " 0, 0, 0, 0, 0, 0, 0, 0)"
                ),
                {"sha": f"{k}" * 64, "metadata": json.dumps(metadata)},
            )

    upgrade(fresh_url, "run_facets_configs")

    with fresh_engine.connect() as connection:
        rows = connection.execute(
            text("SELECT meta_gpu, meta_recipe, meta_te_version, meta_git_commit FROM runs ORDER BY id")
        ).all()
    assert [tuple(row) for row in rows] == [
        ("h100", "delayed", "2.8.0", "abc1234"),
        ("b200", "mxfp8", None, None),
        (None, None, None, None),
        (None, "7", None, None),
    ]
    indexes = {index["name"] for index in inspect(fresh_engine).get_indexes("runs")}
    assert {"ix_runs_meta_gpu_id", "ix_runs_meta_recipe_id"} <= indexes

    downgrade(fresh_url, BEFORE)
    columns = {column["name"] for column in inspect(fresh_engine).get_columns("runs")}
    assert not {c for c in columns if c.startswith("meta_")}
