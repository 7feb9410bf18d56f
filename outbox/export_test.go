package outbox

var StorableJSON = storableJSON
