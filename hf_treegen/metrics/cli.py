"""``hf-treegen qasper-score``: the official QASPER evaluator as a command.

    hf-treegen qasper-score --gold qasper-test-v0.3.json --predictions preds.jsonl [--text-evidence-only]

Prints ``json.dumps(scores, indent=2)`` exactly like ``qasper_evaluator.py``. Exit code 0 on success,
2 (with a message on stderr) when a file cannot be read or is malformed.
"""

from __future__ import annotations

import argparse
import json
import sys

from hf_treegen.cli_types import user_error
from hf_treegen.metrics.qasper_official import evaluate_predictions, gold_from_papers, read_predictions_jsonl

HELP = "score QASPER predictions with the official Answer F1 / Evidence F1"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``qasper-score`` options to ``parser`` (a subparser or a standalone parser)."""
    parser.add_argument("--gold", required=True, metavar="FILE",
                        help="raw QASPER JSON (e.g. qasper-test-v0.3.json): paper id -> paper with 'qas'")
    parser.add_argument("--predictions", required=True, metavar="FILE.jsonl",
                        help="JSON lines {question_id, predicted_answer, predicted_evidence}")
    parser.add_argument("--strict", action="store_true",
                        help="fail (exit 2) instead of warning when no prediction matches a gold question id")
    parser.add_argument("--text-evidence-only", action="store_true",
                        help="drop 'FLOAT SELECTED' (figure/table) strings from the gold evidence "
                             "(off by default, like the official evaluator)")
    return parser


def _fail(message: str) -> int:
    return user_error("qasper-score", message)


def run(args: argparse.Namespace) -> int:
    """Score ``args.predictions`` against ``args.gold``, print the JSON, return the exit code."""
    try:
        with open(args.gold, encoding="utf-8") as handle:
            raw = json.load(handle)
    except OSError as err:
        return _fail(f"cannot read gold file {args.gold}: {err.strerror or err}")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return _fail(f"gold file {args.gold} is not valid JSON: {err}")
    if not isinstance(raw, dict):
        return _fail(f"gold file {args.gold}: expected a JSON object mapping paper ids to papers")
    from hf_treegen.rag.qasper import papers_from_raw

    try:
        papers_from_raw(raw)  # the loader's own field checks: a gold file it rejects is not scored either
        gold = gold_from_papers(raw, text_evidence_only=args.text_evidence_only)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return _fail(f"gold file {args.gold} is not in the raw QASPER layout: {err}")
    try:
        predictions = read_predictions_jsonl(args.predictions)
    except OSError as err:
        return _fail(f"cannot read predictions file {args.predictions}: {err.strerror or err}")
    except (ValueError, UnicodeDecodeError) as err:
        return _fail(str(err))
    if predictions and not set(predictions) & set(gold):
        message = (f"none of the {len(predictions)} question ids in {args.predictions} is a question of {args.gold} "
                   f"(e.g. {next(iter(predictions))!r}); every score below is 0. Wrong split or id format?")
        if args.strict:
            return _fail(message)
        print(f"hf-treegen qasper-score: warning: {message}", file=sys.stderr)
    print(json.dumps(evaluate_predictions(gold, predictions), indent=2))
    return 0


def qasper_score_main(argv=None) -> int:
    """Entry point: parse ``argv`` (default ``sys.argv[1:]``) and :func:`run`."""
    parser = add_arguments(argparse.ArgumentParser(prog="hf-treegen qasper-score", description=HELP))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(qasper_score_main())
