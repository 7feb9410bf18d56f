package dlq

// Internals that FuzzParseMetadata checks against. The fuzz test decodes its
// input with dlqtool's export codec, which imports this package, so it lives
// in the external test package and reaches these through here.
var (
	BrokerDeathHeaders = brokerDeathHeaders
	BrokerClasses      = brokerClasses
	Truncate           = truncate
)
