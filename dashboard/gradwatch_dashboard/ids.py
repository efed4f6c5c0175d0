"""Component ids of the dashboard, in one place (pages and tests use these names)."""

from __future__ import annotations

URL = "url"
PAGE = "page"
ROUTED = "routed"  # the layout came with the page of the URL already laid out

# runs page
RUNS_PROJECT = "runs-project"
RUNS_STATUS = "runs-status"
RUNS_SEARCH = "runs-search"
RUNS_FINDINGS = "runs-findings"
RUNS_TABLE = "runs-table"
RUNS_TICK = "runs-tick"
RUNS_MORE = "runs-more"

# run page
RUN_KEY = "run-key"
RUN_VERSION = "run-version"
RUN_PENDING = "run-pending"
RUN_LIVE = "run-live"
RUN_TICK = "run-tick"
RUN_HEADER = "run-header"
RUN_LOSS = "run-loss"
RUN_METRICS = "run-metrics"
RUN_HEATMAP = "run-heatmap"
RUN_RATIO = "run-ratio"
RUN_NONFINITE = "run-nonfinite"
RUN_LIFECYCLE = "run-lifecycle"
RUN_STRUCTURE = "run-structure"
RUN_FINDINGS = "run-findings"
RUN_FINGERPRINT = "run-fingerprint"

# compare page
CMP_RUNS = "cmp-runs"
CMP_GROUP = "cmp-group"
CMP_VERDICT = "cmp-verdict"
CMP_CURVES = "cmp-curves"
CMP_TENSORS = "cmp-tensors"
CMP_FINGERPRINT = "cmp-fingerprint"
CMP_DIFF = "cmp-diff"
CMP_STRUCTURE = "cmp-structure-slot"
CMP_CHOSEN = "cmp-chosen"
CMP_ADDRESS = "cmp-address"

# alerts page
ALERTS_TABLE = "alerts-table"
ALERTS_DELIVERIES = "alerts-deliveries"
ALERTS_RULES = "alerts-rules"
ALERTS_TICK = "alerts-tick"
RULE_PROJECT = "rule-project"
RULE_CHECK = "rule-check"
RULE_SEVERITY = "rule-severity"
RULE_WEBHOOK = "rule-webhook"
RULE_ADD = "rule-add"
RULE_MESSAGE = "rule-message"
