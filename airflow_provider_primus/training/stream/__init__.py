"""The Kafka stream as a training source: fetching, decoding and screening events, the event-time
policy, dead letters, where the stream starts and resumes, and how its outages are ridden out."""
