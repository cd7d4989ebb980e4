"""The ElasticTrainingJob: its schema, the rules between its fields, loading and validating a
job file, the CRD generated from the schema, its status, admission and manual overrides."""
