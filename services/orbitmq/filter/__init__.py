"""Message filters evaluated by brokers: SQL92 property conditions."""
