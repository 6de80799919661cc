-- noalso: the layout without more keys (see also): the request's own window
-- limits run to the last argument.

local argc, also, also_slot, also_record = #ARGV, nil, nil, nil
