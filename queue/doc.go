package queue

// Where the SQL lives: a file per table, or per group of tables always written together.
// The package comment is in store.go.
//
//	store.go                  the Store, its hooks and transactions; events (insert, read)
//	plans.go                  plans: create, read, list, charge, budget, reset, cancel
//	plan_import.go            plans and tasks as a plan file imports them (Import, Apply)
//	tasks.go                  tasks: read; added, edited, removed, reset or retried by an
//	                          operator; the failure analyzer's finding
//	claim.go, fast.go,        tasks and leases: claim, start, complete, fail, release,
//	batch.go, report.go,      heartbeat, the lease reaper, batched hot paths and replays
//	lease.go, opentx.go,
//	start.go
//	attemptlog.go             attempt_logs, attempt_log_chunks
//	workers.go                workers (and the token helpers api_tokens.go shares)
//	api_tokens.go             api_tokens
//	web_sessions.go           web_sessions
//	pause.go                  fleet, and pausing, resuming and approving plans
//	push_tokens.go            push_tokens
//	installations.go          installations
//	changedplan.go            github_mirror's version and job_at, marked in every
//	                          transaction that changes a plan (the PlanChanged hook)
//	github_deliveries.go      webhook_deliveries, github_commands
//	github_delivery_cursor.go github_delivery_cursor (pull mode)
//	github_intakes.go         github_intakes
//	github_mirror.go          github_mirror
//	github_labels.go          github_labels
//	github_pulls.go           github_pulls
//	github_rounds.go          github_rounds
//	github_dispatches.go      github_dispatches
//	listen.go, follow.go      LISTEN/NOTIFY of events, and following them in order;
//	                          dashboard.go, outlook.go, metrics.go
//	                          and pacing.go are reads across tables for one consumer
//	jobs.go, schedule.go      River job kinds, queues and periodic jobs
//	scope.go, pgerr.go,       scopes, errors of an unreachable database, the server
//	server.go                 version: no table of their own
