package throttle

// MaxWarnedHosts is how many hosts WarnUnmatched remembers, for the tests.
const MaxWarnedHosts = maxWarnedHosts
