"""The config: its schema and field rules, composing it from conf/, and the variants' facts."""
