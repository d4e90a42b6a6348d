"""Reference privacy values for standard DP-SGD settings.

Copied verbatim from the project's shared reference table (``reference/public.json``,
"Reference values: independent float64 exponentially tilted FFT accountant (see README.md); peer values from dp_accounting 0.6.0 (PLD pessimistic, discretization 1e-4; RDP), prv_accountant 0.2.0 (eps_error 1e-3, remove adjacency), measured 2026-11-21 on a 2-core machine.").

The reference ``epsilon`` / ``delta`` come from an independent float64 exponentially tilted
FFT accountant (agrees with the closed-form Gaussian to ~1e-7 relative down to delta = 1e-16;
epsilon accurate to ~1e-5 relative, delta to ~1e-5 relative, ~1e-4 below delta = 1e-12).
Adjacency is add-or-remove.  Peer columns: ``dp_accounting_pld`` (dp_accounting 0.6.0 PLD,
pessimistic, discretization 1e-4), ``prv_accountant`` (0.2.0, eps_error 1e-3; None where it
raised), ``rdp`` (dp_accounting RDP), ``closed_form`` (Gaussian composition).
"""

# epsilon rows were solved to 1e-5 absolute (group rows 1e-4 absolute)
ROWS = [
    {'case': 'gauss_70_1200', 'mechanism': 'gaussian', 'sigma': 70.0, 'q': 1.0, 'steps': 1200, 'query': 'delta', 'epsilon': 0.25, 'delta': 0.10831739277553404, 'closed_form': 0.10831736191402391},
    {'case': 'gauss_70_1200', 'mechanism': 'gaussian', 'sigma': 70.0, 'q': 1.0, 'steps': 1200, 'query': 'delta', 'epsilon': 0.5, 'delta': 0.05090347528768552, 'closed_form': 0.05090347224343106},
    {'case': 'gauss_70_1200', 'mechanism': 'gaussian', 'sigma': 70.0, 'q': 1.0, 'steps': 1200, 'query': 'delta', 'epsilon': 1.0, 'delta': 0.00639604129023676, 'closed_form': 0.006396042646542366},
    {'case': 'gauss_70_1200', 'mechanism': 'gaussian', 'sigma': 70.0, 'q': 1.0, 'steps': 1200, 'query': 'delta', 'epsilon': 1.5, 'delta': 0.0003491759081770638, 'closed_form': 0.00034917603201360626},
    {'case': 'gauss_70_1200', 'mechanism': 'gaussian', 'sigma': 70.0, 'q': 1.0, 'steps': 1200, 'query': 'delta', 'epsilon': 2.0, 'delta': 7.77235356006853e-06, 'closed_form': 7.772356946449523e-06},
    {'case': 'gauss_70_1200', 'mechanism': 'gaussian', 'sigma': 70.0, 'q': 1.0, 'steps': 1200, 'query': 'delta', 'epsilon': 3.0, 'delta': 2.2708112919526372e-10, 'closed_form': 2.2708124737130686e-10},
    {'case': 'gauss_70_1200', 'mechanism': 'gaussian', 'sigma': 70.0, 'q': 1.0, 'steps': 1200, 'query': 'delta', 'epsilon': 4.0, 'delta': 1.348992323154866e-16, 'closed_form': 1.3489930875015246e-16},
    {'case': 'psg_0.5_1e-3_1000', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'delta', 'epsilon': 0.5, 'delta': 0.006968838665813286, 'dp_accounting_pld': 0.006968917072165644, 'prv_accountant': 0.006968819586195308},
    {'case': 'psg_0.5_1e-3_1000', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'delta', 'epsilon': 1.0, 'delta': 0.0015331545092070107, 'dp_accounting_pld': 0.0015331637068820118, 'prv_accountant': 0.0015331532695307965},
    {'case': 'psg_0.5_1e-3_1000', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'delta', 'epsilon': 2.0, 'delta': 0.00015097146093885248, 'dp_accounting_pld': 0.0001509722444415481, 'prv_accountant': 0.00015097158955717894},
    {'case': 'psg_0.5_1e-3_1000', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'delta', 'epsilon': 3.0, 'delta': 1.7023724804694087e-05, 'dp_accounting_pld': 1.702382926253571e-05, 'prv_accountant': 1.702375587009673e-05},
    {'case': 'psg_0.5_1e-3_1000', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'delta', 'epsilon': 4.0, 'delta': 1.7448868525852044e-06, 'dp_accounting_pld': 1.7449004388447126e-06, 'prv_accountant': 1.7448920391562467e-06},
    {'case': 'psg_0.5_1e-3_1000', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'delta', 'epsilon': 6.0, 'delta': 1.1785526840132036e-08, 'dp_accounting_pld': 1.1785667294967956e-08, 'prv_accountant': 1.1785561214050637e-08},
    {'case': 'psg_0.5_1e-3_1000', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'delta', 'epsilon': 8.0, 'delta': 5.692805062156225e-11, 'dp_accounting_pld': 5.693016744510998e-11, 'prv_accountant': 5.692801426296203e-11},
    {'case': 'psg_1.0_0.01_2000', 'mechanism': 'poisson_gaussian', 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'delta', 'epsilon': 1.0, 'delta': 0.01827380871313046, 'dp_accounting_pld': 0.01827421220409997, 'prv_accountant': 0.01827381232724237},
    {'case': 'psg_1.0_0.01_2000', 'mechanism': 'poisson_gaussian', 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'delta', 'epsilon': 2.0, 'delta': 0.0002549591826398078, 'dp_accounting_pld': 0.0002549719028914341, 'prv_accountant': 0.0002549593388288355},
    {'case': 'psg_1.0_0.01_2000', 'mechanism': 'poisson_gaussian', 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'delta', 'epsilon': 3.0, 'delta': 7.492422739693348e-07, 'dp_accounting_pld': 7.493018453246893e-07, 'prv_accountant': 7.49242857872562e-07},
    {'case': 'psg_1.0_0.01_2000', 'mechanism': 'poisson_gaussian', 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'delta', 'epsilon': 4.0, 'delta': 7.331773428086683e-10, 'dp_accounting_pld': 7.332697112533312e-10, 'prv_accountant': 7.331774665572516e-10},
    {'case': 'psg_1.0_0.01_2000', 'mechanism': 'poisson_gaussian', 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'delta', 'epsilon': 6.0, 'delta': 3.309282335730129e-16, 'dp_accounting_pld': 9.768402938159646e-14, 'prv_accountant': 3.18107609114411e-16},
    {'case': 'psg_0.65_0.01', 'mechanism': 'poisson_gaussian', 'sigma': 0.65, 'q': 0.01, 'steps': 100, 'query': 'epsilon', 'epsilon': 2.994335174560547, 'delta': 1e-05, 'dp_accounting_pld': 2.994337554433594, 'prv_accountant': 2.9943432894007382, 'rdp': 3.8676285310412606},
    {'case': 'psg_0.65_0.01', 'mechanism': 'poisson_gaussian', 'sigma': 0.65, 'q': 0.01, 'steps': 500, 'query': 'epsilon', 'epsilon': 4.521785736083984, 'delta': 1e-05, 'dp_accounting_pld': 4.521788493474321, 'prv_accountant': 4.521817287437148, 'rdp': 5.452819989367622},
    {'case': 'psg_0.65_0.01', 'mechanism': 'poisson_gaussian', 'sigma': 0.65, 'q': 0.01, 'steps': 1000, 'query': 'epsilon', 'epsilon': 5.787876129150391, 'delta': 1e-05, 'dp_accounting_pld': 5.787875817314517, 'prv_accountant': 5.787933612530155, 'rdp': 6.775694934645162},
    {'case': 'psg_0.65_0.01', 'mechanism': 'poisson_gaussian', 'sigma': 0.65, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 7.750759124755859, 'delta': 1e-05, 'dp_accounting_pld': 7.750764954669547, 'prv_accountant': 7.750881051119086, 'rdp': 8.832249744513208},
    {'case': 'psg_2_0.01', 'mechanism': 'poisson_gaussian', 'sigma': 2.0, 'q': 0.01, 'steps': 1000, 'query': 'epsilon', 'epsilon': 0.6220283508300781, 'delta': 1e-05, 'dp_accounting_pld': 0.6220485250880967, 'prv_accountant': 0.6220303956599103, 'rdp': 0.6861853363943164},
    {'case': 'psg_2_0.01', 'mechanism': 'poisson_gaussian', 'sigma': 2.0, 'q': 0.01, 'steps': 5000, 'query': 'epsilon', 'epsilon': 1.4773750305175781, 'delta': 1e-05, 'dp_accounting_pld': 1.477423040355912, 'prv_accountant': 1.4773770699771056, 'rdp': 1.6131296313476846},
    {'case': 'psg_2_0.01', 'mechanism': 'poisson_gaussian', 'sigma': 2.0, 'q': 0.01, 'steps': 10000, 'query': 'epsilon', 'epsilon': 2.162700653076172, 'delta': 1e-05, 'dp_accounting_pld': 2.1627736442812835, 'prv_accountant': 2.1627047825223684, 'rdp': 2.352913128781947},
    {'case': 'mnist_1.1', 'mechanism': 'poisson_gaussian', 'sigma': 1.1, 'q': 0.004266666666666667, 'steps': 14040, 'query': 'epsilon', 'epsilon': 2.3795509338378906, 'delta': 1e-05, 'dp_accounting_pld': 2.3796435199377064, 'prv_accountant': 2.379554528680094, 'rdp': 2.5943633557853634},
    {'case': 'tiny_delta_0.5_1e-3', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 100, 'query': 'epsilon', 'epsilon': 8.869579315185547, 'delta': 1e-13, 'dp_accounting_pld': 8.889283709696711, 'prv_accountant': None, 'rdp': 10.03745853926414},
    {'case': 'tiny_delta_0.5_1e-3', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 500, 'query': 'epsilon', 'epsilon': 9.846477508544922, 'delta': 1e-13, 'dp_accounting_pld': 9.94804519738722, 'prv_accountant': None, 'rdp': 11.075485615581654},
    {'case': 'tiny_delta_0.5_1e-3', 'mechanism': 'poisson_gaussian', 'sigma': 0.5, 'q': 0.001, 'steps': 1000, 'query': 'epsilon', 'epsilon': 10.44210433959961, 'delta': 1e-13, 'dp_accounting_pld': 17.89647643325111, 'prv_accountant': None, 'rdp': 11.672556935303588},
    {'case': 'group_cifar_sigma1', 'mechanism': 'poisson_gaussian_group', 'group_size': 1, 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 2.955230712890625, 'delta': 1e-06, 'dp_accounting_pld': 2.9552579975587907},
    {'case': 'group_cifar_sigma1', 'mechanism': 'poisson_gaussian_group', 'group_size': 2, 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 6.432586669921875, 'delta': 1e-06, 'dp_accounting_pld': 6.432606934590777},
    {'case': 'group_cifar_sigma1', 'mechanism': 'poisson_gaussian_group', 'group_size': 4, 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 14.535003662109375, 'delta': 1e-06, 'dp_accounting_pld': 14.534980826038058},
    {'case': 'group_cifar_sigma1', 'mechanism': 'poisson_gaussian_group', 'group_size': 8, 'sigma': 1.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 34.890716552734375, 'delta': 1e-06, 'dp_accounting_pld': 34.89069864253446},
    {'case': 'group_cifar_sigma2', 'mechanism': 'poisson_gaussian_group', 'group_size': 1, 'sigma': 2.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 1.034942626953125, 'delta': 1e-06, 'dp_accounting_pld': 1.034990581979388},
    {'case': 'group_cifar_sigma2', 'mechanism': 'poisson_gaussian_group', 'group_size': 2, 'sigma': 2.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 2.200225830078125, 'delta': 1e-06, 'dp_accounting_pld': 2.200230467617984},
    {'case': 'group_cifar_sigma2', 'mechanism': 'poisson_gaussian_group', 'group_size': 4, 'sigma': 2.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 4.768402099609375, 'delta': 1e-06, 'dp_accounting_pld': 4.768408185113536},
    {'case': 'group_cifar_sigma2', 'mechanism': 'poisson_gaussian_group', 'group_size': 8, 'sigma': 2.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 10.715911865234375, 'delta': 1e-06, 'dp_accounting_pld': 10.715942297070951},
    {'case': 'group_cifar_sigma2', 'mechanism': 'poisson_gaussian_group', 'group_size': 16, 'sigma': 2.0, 'q': 0.01, 'steps': 2000, 'query': 'epsilon', 'epsilon': 25.598114013671875, 'delta': 1e-06, 'dp_accounting_pld': 25.598133782784604},
]

#: The tight noise multiplier for eps = 8, delta = 1e-5, q = 0.01, 2000 steps (same oracle).
SIGMA_STAR_EPS8 = 0.643334
