package outbox

var StorableJSON = storableJSON

// StatsSQL is Stats's query on table, for its plan test.
func StatsSQL(table string) string { return render(table, statsSQL) }

// PurgeSelectSQL is the purge's select on table, for its plan test.
func PurgeSelectSQL(table string) string { return render(table, purgeSelectSQL) }
