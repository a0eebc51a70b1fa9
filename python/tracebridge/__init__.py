"""tracebridge."""
