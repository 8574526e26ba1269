"""Reliability harnesses that check a property under stress: kill -9 during ingestion
(`ragserve eval crash`), concurrent writers and readers (`ragserve eval races`), overload held
for minutes (`ragserve bench soak`), and the prefix-cache side channel (`ragserve bench
cache-oracle`)."""
