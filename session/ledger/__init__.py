"""The ledger: what requests cost and what compression changed, in tokens, money and actions.

`book.py` records each upstream call's charge with its full-history counterfactual, priced by
billing tier (`tiers.py`); `savings.py` sums them; `shadow.py` sends sampled shadow checks and
`actions.py` compares their next actions.

May import: session.ports, session.config, session.errors.
"""
