"""What shapes a sequence's output whatever the backend: chat templates, stop sequences,
tool-call parsing, and structured output: `structured.py` runs it on one sequence (its
grammar, its parser, its log-probabilities), `constraint.py` applies a grammar to logits,
`call_grammar.py` writes a call in the model's own format. The JSON-schema grammars are
common/grammar.py's, where the front checks schemas with them too."""
