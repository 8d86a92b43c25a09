"""The ledger: what requests cost and what compression changed, in tokens, money and actions.

`tiers.py` splits a provider's usage into its billing tiers (uncached, cache read, cache write,
output), prices them and works out, turn by turn, what the uncompressed history would have been
billed with the provider's prefix caching (pure); `savings.py` sums recorded charges into
savings per session, model and overall (pure); `book.py` records each charge (requests, summary
calls, recall rounds, shadow calls). `actions.py` reads and compares the next action of an
answer (pure); `shadow.py` runs the shadow checks that send a compressed request's
uncompressed history again, in the background, and records whether the action changed.

May import: proxy.doors, proxy.provider, proxy.settings, proxy.prices, proxy.errors.
"""
