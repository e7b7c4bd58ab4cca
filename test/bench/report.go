package bench

import "github.com/wcache/wcache/test/benchreport"

// The report a run fills and the samples its figures summarize
// (test/benchreport: the JSON schema, targets, summaries and rendering).
type (
	Report  = benchreport.Report
	Summary = benchreport.Summary
	Target  = benchreport.Target
	series  = benchreport.Series
	laps    = benchreport.Laps
)
